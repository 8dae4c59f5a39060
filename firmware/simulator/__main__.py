from fleet.bmcsim.cli import main

main()
